"""A job's payment as one database function, ``horde_pay``: one round trip instead of four.

It runs the claim, then the charge and the request's end, each statement with its own
snapshot (PL/pgSQL under READ COMMITTED), so two submits ending a request's last two jobs
cannot both miss that it ended; it credits the released holds; it claims no job not running.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

PAY = """
CREATE OR REPLACE FUNCTION horde_pay(
    p_gen_id uuid, p_worker_id uuid, p_owner_id integer, p_wp_id uuid,
    p_requester_id integer,
    p_generation text, p_reply jsonb, p_reported_usage jsonb, p_charge_basis varchar,
    p_seed bigint, p_gen_metadata jsonb, p_state varchar, p_censored boolean,
    p_completed_at timestamptz,
    p_reward numeric, p_charge numeric, p_tokens integer, p_keep integer,
    p_sample double precision,
    OUT claimed boolean, OUT owner_kudos numeric, OUT speed double precision,
    OUT worker_kudos numeric, OUT fulfilments integer, OUT contributions bigint,
    OUT n integer, OUT faulted boolean, OUT cancelled boolean, OUT webhook varchar,
    OUT requester_kudos numeric, OUT complete boolean, OUT jobs bigint,
    OUT held_by integer[], OUT held numeric[], OUT held_balances numeric[]
)
LANGUAGE plpgsql VOLATILE AS $pay$
DECLARE
    running bigint;
    balance numeric;
BEGIN
    -- The claim: the compare-and-set on a running job.
    UPDATE processing_gens SET
        generation = p_generation, reply = p_reply, reported_usage = p_reported_usage,
        charge_basis = p_charge_basis, seed = p_seed, gen_metadata = p_gen_metadata,
        state = p_state, reward = p_reward, charge = p_charge, censored = p_censored,
        completed_at = p_completed_at
    WHERE processing_gens.id = p_gen_id
        AND processing_gens.generation IS NULL AND NOT processing_gens.faulted
        AND NOT processing_gens.cancelled;
    claimed := FOUND;
    IF NOT claimed THEN
        RETURN;
    END IF;

    -- The worker's speed sample (its newest p_keep kept, their average its speed), its
    -- counters, the owner's reward and its ledger row.
    INSERT INTO worker_performances (worker_id, performance) VALUES (p_worker_id, p_sample);
    DELETE FROM worker_performances
    WHERE worker_performances.worker_id = p_worker_id
        AND worker_performances.id NOT IN (
            SELECT newest.id FROM worker_performances AS newest
            WHERE newest.worker_id = p_worker_id ORDER BY newest.id DESC LIMIT p_keep
        );
    UPDATE workers SET
        speed = (SELECT avg(samples.performance) FROM worker_performances AS samples
                 WHERE samples.worker_id = p_worker_id),
        kudos = workers.kudos + p_reward, fulfilments = workers.fulfilments + 1,
        contributions = workers.contributions + p_tokens
    WHERE workers.id = p_worker_id
    RETURNING workers.speed, workers.kudos, workers.fulfilments, workers.contributions
    INTO speed, worker_kudos, fulfilments, contributions;
    UPDATE users SET kudos = users.kudos + p_reward WHERE users.id = p_owner_id
    RETURNING users.kudos INTO owner_kudos;
    IF FOUND THEN
        INSERT INTO kudos_ledger (user_id, delta, reason, wp_id, generation_id, worker_id,
            balance_after)
        VALUES (p_owner_id, p_reward, 'reward', p_wp_id, p_gen_id, p_worker_id, owner_kudos);
    END IF;

    -- The request's row lock: every submit of its jobs takes it before the requester's row.
    SELECT waiting_prompts.n, waiting_prompts.faulted, waiting_prompts.cancelled,
        waiting_prompts.webhook
    INTO n, faulted, cancelled, webhook
    FROM waiting_prompts WHERE waiting_prompts.id = p_wp_id
    FOR UPDATE;

    -- The requester's charge (none when it is 0) and its ledger row.
    IF p_charge <> 0 THEN
        UPDATE users SET kudos = users.kudos - p_charge WHERE users.id = p_requester_id
        RETURNING users.kudos INTO requester_kudos;
        IF FOUND THEN
            INSERT INTO kudos_ledger (user_id, delta, reason, wp_id, generation_id,
                balance_after)
            VALUES (p_requester_id, -p_charge, 'charge', p_wp_id, p_gen_id, requester_kudos);
        END IF;
    END IF;

    -- The request's jobs, counted in a snapshot taken after its lock; it ends when it was
    -- faulted or cancelled, or has no job left to hand out and none running.
    SELECT count(*) FILTER (WHERE processing_gens.generation IS NULL
                            AND NOT processing_gens.faulted AND NOT processing_gens.cancelled),
           count(*)
    INTO running, jobs
    FROM processing_gens WHERE processing_gens.wp_id = p_wp_id;
    complete := coalesce(faulted, false) OR coalesce(cancelled, false)
        OR (n <= 0 AND running = 0);
    IF NOT complete THEN
        RETURN;
    END IF;

    -- Its end: deactivated, its unreleased holds released and credited back one by one,
    -- in the order of user and amount.
    UPDATE waiting_prompts SET active = false WHERE waiting_prompts.id = p_wp_id;
    WITH released AS (
        UPDATE kudos_holds SET released = true, released_at = now()
        WHERE kudos_holds.wp_id = p_wp_id AND NOT kudos_holds.released
        RETURNING kudos_holds.user_id, kudos_holds.amount
    )
    SELECT coalesce(array_agg(released.user_id ORDER BY released.user_id, released.amount),
                    ARRAY[]::integer[]),
           coalesce(array_agg(released.amount ORDER BY released.user_id, released.amount),
                    ARRAY[]::numeric[])
    INTO held_by, held
    FROM released;
    held_balances := ARRAY[]::numeric[];
    FOR i IN 1 .. coalesce(array_length(held_by, 1), 0) LOOP
        UPDATE users SET kudos = users.kudos + held[i] WHERE users.id = held_by[i]
        RETURNING users.kudos INTO balance;
        INSERT INTO kudos_ledger (user_id, delta, reason, wp_id, balance_after)
        VALUES (held_by[i], held[i], 'upfront_release', p_wp_id, balance);
        held_balances := held_balances || balance;
    END LOOP;
END
$pay$
"""


def upgrade() -> None:
    op.execute(PAY)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS horde_pay")
