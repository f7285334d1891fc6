"""axiom-rl's tasks as a `verifiers` environment, under the top-level name verifiers loads
tasksets by (`vf-eval axiom-rl-verifiers`, prime-rl's `--env.taskset.id axiom-rl-verifiers`):
a dotted id is not one it can import. The taskset is axiom_rl.integrations.verifiers_env's."""

from axiom_rl.integrations.verifiers_env import AxiomData, AxiomTask, AxiomTaskset, AxiomTasksetConfig

__all__ = ["AxiomData", "AxiomTask", "AxiomTaskset", "AxiomTasksetConfig"]
