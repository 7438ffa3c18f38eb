"""otel_rl/_internal/stats"""
