"""axiom-rl's problems, verifier and sandbox for other trainers and other machines.

- trl.py: reward functions with TRL's signature (GRPOTrainer's `reward_funcs`)
- verl.py: `compute_score`, verl's custom reward function
- verifiers_env.py: our tasks as an environment of the `verifiers` library (prime-rl), installed
  as the top-level `axiom_rl_verifiers` (id axiom-rl-verifiers)
- hf_datasets.py: problems as a Hugging Face `datasets.Dataset`, or verl's parquet
- service.py and run_code.py: `axiom-rl sandbox serve`, the sandbox behind HTTP (SandboxFusion's
  /run_code and our batch verification)
- remote.py: the client of that service, verification on other machines
- scoring.py: what they share: problems from dataset columns, verdicts and rewards
"""
