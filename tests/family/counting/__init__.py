"""A family defined outside the package: card, env, observers and prompt."""
