"""Generated protobuf modules; see proto/README.md. Regenerate with hack/gen-proto."""
