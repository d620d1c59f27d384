"""Adapters that let other training libraries drive derl-bench's envs and Meta-Rewards."""
