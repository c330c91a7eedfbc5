"""Generated from proto/cri/ by hack/gen-proto; do not edit."""
