# The two commands a new machine needs are `make demo` and `make test`; every other target is a step of those.
PY := .venv/bin/python
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: setup demo demo-numa test lint unit integration vm kubelet-compare cluster proto bench image clean

setup: .venv/.installed

.venv/.installed: pyproject.toml hack/setup
	hack/setup
	touch $@

demo: setup
	hack/demo

# The same on a 2-NUMA-node cgroup v2 guest, with the documentation's pod-scope-mixed and empty-shared-pool pods.
demo-numa: setup
	hack/containerd-env fetch >/dev/null
	hack/vm-run --numa-nodes 2 --cpus 8 --threads-per-core 2 --memory 12G -- \
		hack/demo --base /run/nri-podlevel-demo --pods deploy/demo/pods-numa.yaml

lint: setup
	ruff check .
	mypy
	lint-imports
	hack/gen-proto --check

unit: setup
	$(PY) -m pytest -m "not integration and not vm and not cluster" tests

integration: setup
	$(PY) -m pytest -m integration tests/integration

vm: setup
	hack/containerd-env fetch >/dev/null  # the guest has no network: tests/vm runs containerd from the cache
	hack/image >/dev/null  # and imports the agent's image from the archive built here
	hack/vm-run --numa-nodes 2 --cpus 8 --threads-per-core 2 --memory 4G --timeout 1800 -- \
		$(PY) -m pytest -m vm tests/vm
# The agent's image proves the cgroup namespace, which no topology changes; its import costs minutes of TCG.
	hack/vm-run --numa-nodes 4 --cpus 8 --threads-per-core 2 --memory 4G --timeout 1200 -- \
		$(PY) -m pytest -m vm --ignore tests/vm/test_vm_agent_image.py tests/vm

# The same static pods under a real kubelet v1.37 (built from the Go module proxy into a cache outside the
# checkout, hack/build-go-tools): its own managers against the plugin, in the 2-NUMA guest (the short form).
kubelet-compare: setup
	hack/kubelet-compare --quick

# deploy/ installed on a one-node cluster of real Kubernetes binaries (hack/cluster: the control plane and the
# kubelet built from the Go module proxy, in the 2-NUMA guest), rolled, and the Helm chart on it.
cluster: setup
	hack/containerd-env fetch >/dev/null  # the guest has no network: its containerd comes from the cache
	$(PY) -m pytest -m cluster tests/cluster

test: lint unit integration vm kubelet-compare cluster

# The agent's and the webhook's image as an OCI archive (hack/image; its path is the last line printed).
image: setup
	hack/image

proto: setup
	hack/gen-proto

bench: setup
	hack/bench
	hack/bench-nri

clean:
	rm -rf .venv .cache
