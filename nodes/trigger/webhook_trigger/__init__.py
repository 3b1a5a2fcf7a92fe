"""The Webhook Trigger node: definition.json + executor.py."""
