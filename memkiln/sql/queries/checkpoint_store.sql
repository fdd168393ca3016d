-- Write the store's committed state to its file (the catalog io/store.STORE_CATALOG).
checkpoint store
