"""Serving: the configuration (instances x threads x dynamic-batching window) that sustains the highest request
rate within a latency SLO, measured with open-loop arrivals, and the server the artifact ships with.

One module per concept (ARCHITECTURE.md, "Serving"): ``batcher`` (the dynamic batcher's rule, pure),
``v2`` (the Open Inference Protocol's messages), ``server`` (the HTTP server copied into the artifact as
``serve.py``), ``schedule`` (open-loop arrival times), ``loadgen`` (the open-loop client), ``simulate``
(a configuration's latency predicted from measured service times), ``search`` (the serving search),
``configs`` (the same configuration for Triton, TorchServe and Ray Serve).
"""
