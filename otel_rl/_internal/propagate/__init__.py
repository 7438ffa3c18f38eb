"""otel_rl/_internal/propagate"""
