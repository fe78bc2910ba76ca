"""Deployment tooling: generates the Helm chart's files and the plain Kubernetes manifests."""
