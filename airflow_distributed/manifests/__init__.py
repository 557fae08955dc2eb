"""Pure builders: a ``ClusterPlan`` turned into what a backend launches (process specs, Kubernetes objects)."""
