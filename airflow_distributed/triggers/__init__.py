"""Triggers for deferrable mode: ``kubernetes.DistributedJobTrigger`` waits for a job in the triggerer."""
