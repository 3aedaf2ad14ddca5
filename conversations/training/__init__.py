"""Training the duplicate heads: the shipped head offline, each tenant's verifier from its reviews, and the service
that queues, trains, activates and loads a tenant's verifiers."""
