"""Generated kubelet device plugin API v1beta1 (``api.proto``; regenerate with scripts/gen-proto.sh)."""
