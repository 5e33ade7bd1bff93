"""Model Garden configs: the encoder config and the registered experiments."""
