"""Pure job state, beside ``plan`` and ``manifests``: replica slots, the tracker of a job's pods, verdicts, log
cursors and the replica table (``job_watch``). No I/O and no Kubernetes client: the hooks feed it what they read."""
