"""cost_models plug-ins for autosearch."""
