"""openrlhf_speed: SPEED-RL curriculum for OpenRLHF."""
