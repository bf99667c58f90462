"""The emulators of the lab's simulated hardware, one module per tool. SIMULATED."""
