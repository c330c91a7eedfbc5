"""Generated from proto/ttrpc/ by hack/gen-proto; do not edit."""
