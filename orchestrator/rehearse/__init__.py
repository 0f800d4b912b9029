"""``orch rehearse``: the user's job on this machine, under the real node agent, preempted and resumed."""
