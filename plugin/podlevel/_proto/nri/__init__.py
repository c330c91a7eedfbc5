"""Generated from proto/nri/ by hack/gen-proto; do not edit."""
