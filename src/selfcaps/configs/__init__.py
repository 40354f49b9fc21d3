"""YAML presets shipped with selfcaps (``<method>_<preset>.yaml`` and ``base.yaml``)."""
