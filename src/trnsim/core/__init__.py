"""The NeuronCore machine: instruction set (isa), trace records, memory, checks and execution."""
