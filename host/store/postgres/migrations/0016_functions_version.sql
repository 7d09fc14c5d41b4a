-- 16: the version of the functions file (functions.sql) the database holds. From here on the
-- functions are not in the migrations: every start applies functions.sql after them, unless
-- the database holds a newer version (a host of a newer version applied it: an older host
-- keeps those functions). One row.
CREATE TABLE a2e_functions (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    version integer NOT NULL,
    digest text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
