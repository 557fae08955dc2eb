"""A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) and a test
kubelet, for the tests that run against a real API server instead of the emulator."""
