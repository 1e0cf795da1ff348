"""Users and money: API keys and the kudos ledger."""
