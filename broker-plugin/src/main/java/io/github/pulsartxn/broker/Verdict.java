package io.github.pulsartxn.broker;

/** What a reader does with an entry below the gate (the Python readers' {@code Verdict}). */
public enum Verdict {
    /** A plain entry, or a committed transaction's winning writer. */
    DELIVER,
    /** Aborted, a losing writer, another deployment, malformed, or unknown: never shown. */
    SKIP,
    /** The transaction is still OPEN: its end decides; nothing after it may pass. */
    WAIT
}
