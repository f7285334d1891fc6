"""Process reward models whose step labels come from the verifier.

steps.py        a completion split into steps, per task
labels.py       exact Countdown labels, Monte-Carlo code labels, labels files
labelling.py    an evaluation run's completions labelled (axiom-rl prm label)
model.py        the PRM: a causal LM's body with a one-logit head, trained and saved
evaluation.py   step AUC and best-of-N reranking against the verifier
components.py   oracle_steps and prm as reward-stage components
"""
