"""What creates or deletes across apps: a tenant's set-up, and the deletion of a tenant or a knowledge base with
everything every app holds for it. It sits above the apps (tenants < retrieval < conversations < lifecycle, checked
by import-linter), so that none of them reaches up to another to finish its own deletion."""
