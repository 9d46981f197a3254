"""Facts about the machine a run measures: its fingerprint (hardware key and stack), device telemetry during a
measurement, and the datasheet peaks that MFU and %-of-peak figures divide by. Imports nothing else of the package."""
