"""An example autosearch plug-in: :class:`~autosearch_device_runner.runner.DeviceRunner`, registered as the runner
``device`` by this distribution's entry point (group ``autosearch.runners``)."""

from autosearch_device_runner.runner import OPTIONS, DeviceRunner, create

__all__ = ["OPTIONS", "DeviceRunner", "create"]
