"""Training one run: the LightningModule, its data and callbacks, the run itself and what it leaves
behind.
"""
