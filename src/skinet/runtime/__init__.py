"""What the machine running SkiNet has and how a process takes part: devices and their settings,
the allocator, the process rank and seed derivation. Imports only the config.
"""
