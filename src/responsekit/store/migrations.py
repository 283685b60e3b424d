"""Versioned schema migrations, applied at start; the SQL runs on SQLite and PostgreSQL alike
(a statement reading JSON is written for each)."""

from __future__ import annotations

import time

from .database import Database

Statement = str | dict[str, str]
"""SQL both databases run, or each database's own (by `Database.dialect`)."""

_USAGE_COLUMNS = """created_ms BIGINT NOT NULL, key_hash TEXT NOT NULL, api_key_id TEXT, request_id TEXT,
    route TEXT NOT NULL, model TEXT NOT NULL, upstream TEXT NOT NULL, input_tokens BIGINT NOT NULL,
    cached_tokens BIGINT NOT NULL, output_tokens BIGINT NOT NULL, reasoning_tokens BIGINT NOT NULL,
    status TEXT NOT NULL, duration_ms BIGINT NOT NULL"""

MIGRATIONS: list[list[Statement]] = [
    [  # 1: responses, their items and events; conversations and their items
        """CREATE TABLE responses (
            id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            status TEXT NOT NULL,
            background BOOLEAN NOT NULL,
            previous_response_id TEXT,
            conversation_id TEXT,
            body TEXT NOT NULL,
            cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
            lease_until BIGINT
        )""",
        "CREATE INDEX responses_running ON responses (status, lease_until)",
        """CREATE TABLE response_items (
            response_id TEXT NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            output BOOLEAN NOT NULL,
            item_id TEXT NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (response_id, position)
        )""",
        "CREATE INDEX response_items_by_id ON response_items (item_id)",
        """CREATE TABLE response_events (
            response_id TEXT NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
            sequence_number INTEGER NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (response_id, sequence_number)
        )""",
        """CREATE TABLE conversations (
            id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            metadata TEXT NOT NULL
        )""",
        """CREATE TABLE conversation_items (
            conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            position BIGINT NOT NULL,
            item_id TEXT NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (conversation_id, position)
        )""",
        "CREATE UNIQUE INDEX conversation_items_by_id ON conversation_items (conversation_id, item_id)",
    ],
    [  # 2: uploaded files, vector stores, their files and file batches (chunks live in the search index)
        """CREATE TABLE files (
            id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            created_ms BIGINT NOT NULL,
            filename TEXT NOT NULL,
            purpose TEXT NOT NULL,
            bytes BIGINT NOT NULL,
            expires_at BIGINT,
            blob TEXT NOT NULL
        )""",
        "CREATE INDEX files_by_owner ON files (owner, created_ms, id)",
        """CREATE TABLE vector_stores (
            id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            created_ms BIGINT NOT NULL,
            name TEXT NOT NULL,
            metadata TEXT NOT NULL,
            expires_after_days INTEGER,
            last_active_at BIGINT NOT NULL
        )""",
        "CREATE INDEX vector_stores_by_owner ON vector_stores (owner, created_ms, id)",
        """CREATE TABLE vector_store_file_batches (
            id TEXT PRIMARY KEY,
            vector_store_id TEXT NOT NULL REFERENCES vector_stores (id) ON DELETE CASCADE,
            created_ms BIGINT NOT NULL,
            cancelled BOOLEAN NOT NULL DEFAULT FALSE
        )""",
        """CREATE TABLE vector_store_files (
            vector_store_id TEXT NOT NULL REFERENCES vector_stores (id) ON DELETE CASCADE,
            file_id TEXT NOT NULL REFERENCES files (id) ON DELETE CASCADE,
            created_ms BIGINT NOT NULL,
            status TEXT NOT NULL,
            last_error TEXT,
            attributes TEXT NOT NULL,
            max_chunk_size_tokens INTEGER NOT NULL,
            chunk_overlap_tokens INTEGER NOT NULL,
            usage_bytes BIGINT NOT NULL DEFAULT 0,
            batch_id TEXT,
            token TEXT NOT NULL,
            lease_until BIGINT,
            PRIMARY KEY (vector_store_id, file_id)
        )""",
        "CREATE INDEX vector_store_files_pending ON vector_store_files (status, lease_until)",
        "CREATE INDEX vector_store_files_by_file ON vector_store_files (file_id)",
        "CREATE INDEX vector_store_files_by_batch ON vector_store_files (batch_id)",
    ],
    [  # 3: the id of the request that created a response (`x-request-id`)
        "ALTER TABLE responses ADD COLUMN request_id TEXT",
    ],
    [  # 4: what the inspector lists and shows: the model to filter by, the timeline of
        # events with their times; the owner's objects newest first, those of one second in the
        # order they were stored (`stored_ms`)
        "ALTER TABLE responses ADD COLUMN model TEXT",
        "ALTER TABLE responses ADD COLUMN timeline TEXT",
        "ALTER TABLE responses ADD COLUMN stored_ms BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE conversations ADD COLUMN stored_ms BIGINT NOT NULL DEFAULT 0",
        {"sqlite": "UPDATE responses SET model = json_extract(body, '$.model'), stored_ms = created_at * 1000",
         "postgres": "UPDATE responses SET model = body::json ->> 'model', stored_ms = created_at * 1000"},
        "UPDATE conversations SET stored_ms = created_at * 1000",
        "CREATE INDEX responses_by_owner ON responses (owner, created_at, stored_ms, id)",
        "CREATE INDEX conversations_by_owner ON conversations (owner, created_at, stored_ms, id)",
    ],
    [  # 5: background runs' leases in milliseconds, not whole seconds, so that a dead process's
        # runs fail within `lease_seconds` of its death (`orchestration/runs.py`)
        "ALTER TABLE responses RENAME COLUMN lease_until TO lease_until_ms",
        "UPDATE responses SET lease_until_ms = lease_until_ms * 1000 WHERE lease_until_ms IS NOT NULL",
    ],
    [  # 6: what attachments read as (docs/attachments.md): a document's text, an image's description
        # by a vision model, by the hash of their bytes, so that a history replayed on every turn is
        # read once and its prompt stays the same from turn to turn (on every replica)
        """CREATE TABLE attachment_texts (
            kind TEXT NOT NULL,
            hash TEXT NOT NULL,
            text TEXT NOT NULL,
            created_ms BIGINT NOT NULL,
            PRIMARY KEY (kind, hash)
        )""",
    ],
    [  # 7: API keys kept as data (`store/api_keys.py`): only a key's SHA-256 is stored, which is
        # also the owner of what the key creates; `models` and `limits` are JSON (NULL: all models)
        """CREATE TABLE api_keys (
            id TEXT PRIMARY KEY,
            key_hash TEXT NOT NULL UNIQUE,
            redacted TEXT NOT NULL,
            name TEXT NOT NULL,
            team TEXT,
            created_at BIGINT NOT NULL,
            last_used_at BIGINT,
            expires_at BIGINT,
            revoked_at BIGINT,
            models TEXT,
            limits TEXT NOT NULL
        )""",
    ],
    [  # 8: limits counted where every replica sees them (`store/counters.py`): requests and tokens
        # per key and window (`span`: `minute`, `day`, `month`, or `key`, the row each admission
        # locks first), and the requests in flight, each with a lease its process renews
        """CREATE TABLE limit_windows (
            key_hash TEXT NOT NULL,
            span TEXT NOT NULL,
            start BIGINT NOT NULL,
            requests BIGINT NOT NULL,
            tokens BIGINT NOT NULL,
            PRIMARY KEY (key_hash, span, start)
        )""",
        """CREATE TABLE limit_flights (
            id TEXT PRIMARY KEY,
            key_hash TEXT NOT NULL,
            until_ms BIGINT NOT NULL
        )""",
        "CREATE INDEX limit_flights_by_key ON limit_flights (key_hash, until_ms)",
    ],
    [  # 9: one row per generation, for the usage report (`store/usage.py`), numbered in order (an
        # integer key appends; a random one would write all over the table's B-tree)
        {"sqlite": f"CREATE TABLE usage_records (id INTEGER PRIMARY KEY, {_USAGE_COLUMNS})",
         "postgres": f"CREATE TABLE usage_records (id BIGSERIAL PRIMARY KEY, {_USAGE_COLUMNS})"},
        "CREATE INDEX usage_records_by_time ON usage_records (created_ms)",
    ],
    [  # 10: a key's weight when busy engines are shared in turn (`backends/fairness.py`)
        "ALTER TABLE api_keys ADD COLUMN weight DOUBLE PRECISION NOT NULL DEFAULT 1",
    ],
    [  # 11: what the model read of a server-run call whose item keeps no result (a web search's
        # results, a page's text), beside the item (`store.MODEL_READ`)
        "ALTER TABLE response_items ADD COLUMN model_read TEXT",
        "ALTER TABLE conversation_items ADD COLUMN model_read TEXT",
    ],
    [  # 12: containers (`containers/service.py`): the key that owns each, its limits, network policy
        # (JSON, domain secrets included), expiry and status, and its files' records; the runtime that
        # runs them keeps only the workspaces
        """CREATE TABLE containers (
            id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            name TEXT NOT NULL,
            created_ms BIGINT NOT NULL,
            last_active_at BIGINT NOT NULL,
            expires_minutes INTEGER NOT NULL,
            memory_limit TEXT NOT NULL,
            network_policy TEXT NOT NULL,
            status TEXT NOT NULL
        )""",
        "CREATE INDEX containers_by_owner ON containers (owner, created_ms, id)",
        "CREATE INDEX containers_by_status ON containers (status, last_active_at)",
        """CREATE TABLE container_files (
            id TEXT PRIMARY KEY,
            container_id TEXT NOT NULL REFERENCES containers (id) ON DELETE CASCADE,
            path TEXT NOT NULL,
            bytes BIGINT NOT NULL,
            source TEXT NOT NULL,
            created_ms BIGINT NOT NULL
        )""",
        "CREATE UNIQUE INDEX container_files_by_path ON container_files (container_id, path)",
        "CREATE INDEX container_files_by_time ON container_files (container_id, created_ms, id)",
    ],
]


async def migrate(database: Database) -> int:
    """Apply the migrations not applied yet; returns the schema version."""
    await database.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)"
    )
    async with database.transaction() as connection:
        if database.dialect == "postgres":
            # Replicas starting together: one migrates, the others wait and find it done.
            await connection.execute("SELECT pg_advisory_xact_lock(7270001)")
        row = await connection.fetchrow("SELECT MAX(version) FROM schema_migrations")
        current = int(row[0] or 0) if row else 0
        for version, statements in enumerate(MIGRATIONS, start=1):
            if version <= current:
                continue
            for statement in statements:
                await connection.execute(statement if isinstance(statement, str) else statement[database.dialect])
            await connection.execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)", version, int(time.time())
            )
    return len(MIGRATIONS)
