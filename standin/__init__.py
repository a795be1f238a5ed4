"""A stand-in for a vLLM server, for tests and demos without a GPU.

It speaks the same HTTP subset and shapes as vLLM 0.32 (see shared/vllm-wire/ and
service/policy/vllm_wire.py), with a small tokenizer of its own and a scripted terminal agent
(behaviour.py) that solves, or fails, the tasks it is given. It is not a language model.

A program of its own (`python -m standin`, or `rollouts policy-stub`): of the service it uses only
the shared wire models (service.policy.vllm_wire), of the sandbox layer only task loading.
"""
