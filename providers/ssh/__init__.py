"""Machines you already own, reached over SSH; and the SSH transport orch uses to reach every instance.

``providers.ssh.settings`` is SDK-free; ``adapter``, ``connection`` (``SshTransport``), ``sftp``
and ``hostkeys`` import paramiko when used; ``transport`` (the interface) and ``local`` do not.
"""
