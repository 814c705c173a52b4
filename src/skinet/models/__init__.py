"""UNet2D and its building blocks; free of Lightning, MLflow and Optuna."""
