"""Running it: logs with request ids, Prometheus metrics, OpenTelemetry traces, recorded engine
exchanges. Beside the layers: any of them may use it, and it imports none above the store."""
