import APNSWire

/// What `campaign channels create` and `delete` do, over a
/// ``ChannelManagementClient``: the command line only parses and prints.
public enum ChannelRuns {
    /// How a new channel became known.
    public enum Creation: Equatable, Sendable {
        /// Its create's 201 named it.
        case answered
        /// A create went unanswered, and the list that followed showed this
        /// channel, which was not there when the run began: most likely the
        /// one that create made (or one another client made meanwhile; either
        /// way a live channel, better on record than lost).
        case foundByList
    }

    /// Creates `count` channels, one request at a time. Each new id goes to
    /// `writer` (appended and fsynced) before `created` hears of it, and
    /// before the next request: whatever ends the run, every channel it made
    /// is on record. A stop between requests ends the run with
    /// ``ChannelError/Kind/stopped``; a refusal ends it with its error.
    ///
    /// The channels that exist are listed first, so that when a create goes
    /// unanswered (its channel may exist with an id that never came back)
    /// a second list names what it made, instead of a blind retry leaving a
    /// channel nobody knows of.
    public static func create(client: ChannelManagementClient, storage: Broadcast.StoragePolicy, count: Int,
                              writer: ChannelIDWriter?, created: (ChannelID, String?, Creation) -> Void) throws(ChannelError) {
        // The list before the first create is part of creating: a refusal
        // of it (a suffixed bundle id, the capability off) is told as the create's.
        var known: Set<ChannelID>
        do { known = try listed(client) } catch {
            if case .refused(_, let status, let reason) = error.kind {
                throw ChannelError(.refused(operation: .create(storage), status: status, reason: reason), requestID: error.requestID)
            }
            throw error
        }
        var made = 0
        var unanswered = 0
        func record(_ id: ChannelID, _ requestID: String?, _ how: Creation) throws(ChannelError) {
            known.insert(id)
            try writer?.append(id)
            made += 1
            created(id, requestID, how)
        }
        while made < count {
            guard !client.isStopping else { throw ChannelError(.stopped) }
            do throws(ChannelError) {
                let reply = try client.perform(.create(storage))
                guard case .created(let id) = reply.outcome else {
                    throw ChannelError(.unexpectedAnswer(ChannelOperation.create(storage).what, "another outcome"), requestID: reply.requestID)
                }
                unanswered = 0
                try record(id, reply.requestID, .answered)
            } catch {
                guard case .unanswered(_, let why) = error.kind else { throw error }
                unanswered += 1
                client.log("a request to create a channel went unanswered (\(why)); listing the channels to find any it made")
                let now = try listed(client)
                for id in now.subtracting(known).sorted(by: { $0.bytes.lexicographicallyPrecedes($1.bytes) }) {
                    try record(id, nil, .foundByList)
                }
                if unanswered >= client.configuration.maxAttempts { throw error }
                guard client.pause(afterFailures: unanswered) else { throw ChannelError(.stopped) }
            }
        }
    }

    private static func listed(_ client: ChannelManagementClient) throws(ChannelError) -> Set<ChannelID> {
        guard case .channels(let ids) = try client.perform(.list).outcome else { return [] }
        return Set(ids)
    }

    /// How one delete ended.
    public enum Deletion: Equatable, Sendable {
        case deleted
        /// ChannelNotRegistered: already gone (deleted before, by an earlier
        /// run that was interrupted, or never in this environment). The goal
        /// of a delete, no channel, holds, so the rest go on.
        case alreadyGone
    }

    /// Deletes `ids` in order. `done` hears of each as its answer comes; any
    /// error other than ChannelNotRegistered ends the run (what was done is
    /// reported), so running the same command again finishes the job.
    public static func delete(client: ChannelManagementClient, ids: [ChannelID],
                              done: (ChannelID, Deletion, String?) -> Void) throws(ChannelError) {
        for id in ids {
            guard !client.isStopping else { throw ChannelError(.stopped) }
            do {
                let reply = try client.perform(.delete(id))
                done(id, .deleted, reply.requestID)
            } catch where error.answerClass == .channelGone {
                done(id, .alreadyGone, error.requestID)
            }
        }
    }
}
