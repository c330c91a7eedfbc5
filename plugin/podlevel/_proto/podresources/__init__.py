"""Generated from proto/podresources/ by hack/gen-proto; do not edit."""
