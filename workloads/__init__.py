"""The built-in YOLO models as ONNX graphs built in code; the core finds them by name
(:data:`autosearch.frontend.importer.BUILTIN_MODELS`)."""
