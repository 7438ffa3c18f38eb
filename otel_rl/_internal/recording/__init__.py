"""otel_rl/_internal/recording"""
