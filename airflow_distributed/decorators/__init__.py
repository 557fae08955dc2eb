"""Task decorators of the provider: ``@task.distributed``."""
