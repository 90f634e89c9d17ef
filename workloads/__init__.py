"""workloads plug-ins for autosearch."""
