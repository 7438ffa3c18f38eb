"""otel_rl/_internal/control"""
