"""otel_rl/_internal/encode"""
