"""Training EAGLE-3 drafters: the TTT loss, data, checkpoints, the trainer."""
