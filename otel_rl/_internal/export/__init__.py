"""otel_rl/_internal/export"""
