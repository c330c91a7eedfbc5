"""The project's fuzzers for as long as asked: `hack/fuzz --minutes N`.

Runs the Hypothesis fuzzers that `make test` runs briefly — the ttrpc codec on random and mutated frames
(tests/property/test_ttrpc_codec_properties.py) and the NRI handler on random and hostile runtime event
sequences (tests/property/test_nri_handler_fuzz.py) — in rounds of fresh random cases until the time is up,
each round sized to last about a minute. Prints one line per round and a closing note with the number of
cases run and of failing rounds; exits 1 when a round failed (its output, with the falsifying example, is
printed), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
TARGETS = (
    "tests/property/test_ttrpc_codec_properties.py::test_any_bytes_either_decode_or_raise_protocol_error",
    "tests/property/test_ttrpc_codec_properties.py::test_mutated_frames_either_decode_or_raise_protocol_error",
    "tests/property/test_nri_handler_fuzz.py::test_random_and_hostile_events_keep_the_connection_and_the_invariants",
)
ROUND_SECONDS = 60.0
FIRST_ROUND_EXAMPLES = 200
CASES = re.compile(r"- (\d+) passing, (\d+) failing")
FAILED = re.compile(r"(\d+) failed")


def run_round(examples: int) -> tuple[int, int, str]:
    """One pytest run with `examples` cases per fuzzer: (cases run, fuzzers that failed, its output)."""
    env = {**os.environ, "PODLEVEL_FUZZ_EXAMPLES": str(examples)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-show-statistics",
               *TARGETS]
    done = subprocess.run(command, cwd=CHECKOUT, env=env, capture_output=True, text=True, check=False)
    cases = sum(int(passing) + int(failing) for passing, failing in CASES.findall(done.stdout))
    failed = FAILED.search(done.stdout)
    failures = int(failed.group(1)) if failed else int(done.returncode != 0)
    return cases, failures, done.stdout + done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, required=True, help="how long to fuzz")
    args = parser.parse_args()
    if not args.minutes > 0:
        parser.error("--minutes must be above 0")
    end = time.monotonic() + args.minutes * 60
    cases = failures = rounds = 0
    examples = FIRST_ROUND_EXAMPLES
    while time.monotonic() < end:
        started = time.monotonic()
        ran, failed, output = run_round(examples)
        took = time.monotonic() - started
        rounds += 1
        cases += ran
        print(f"round {rounds}: {ran} cases in {took:.0f} s, {failed} failing", flush=True)
        if failed:
            failures += failed
            print(output, flush=True)
            break
        left = end - time.monotonic()
        rate = examples / took if took > 0 else examples
        examples = max(10, int(rate * min(ROUND_SECONDS, left)))
    print(f"fuzz: {cases} cases in {rounds} rounds over {args.minutes:g} min "
          f"(ttrpc codec: random and mutated frames; NRI handler: random and hostile event sequences); "
          f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
