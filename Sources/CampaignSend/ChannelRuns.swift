import APNSWire

/// What `campaign channels create` and `delete` do, over a
/// ``ChannelManagementClient``: the command line only parses and prints.
public enum ChannelRuns {
    /// Creates `count` channels, one request at a time. Each new id goes to
    /// `writer` (appended and fsynced) before `created` hears of it, and
    /// before the next request: whatever ends the run, every channel it made
    /// is on record. A stop between requests ends the run with
    /// ``ChannelError/Kind/stopped``; a refusal ends it with its error.
    public static func create(client: ChannelManagementClient, storage: Broadcast.StoragePolicy, count: Int,
                              writer: ChannelIDWriter?, created: (ChannelID, String?) -> Void) throws(ChannelError) {
        for _ in 0..<count {
            guard !client.isStopping else { throw ChannelError(.stopped) }
            let reply = try client.perform(.create(storage))
            guard case .created(let id) = reply.outcome else {
                throw ChannelError(.unexpectedAnswer(ChannelOperation.create(storage).what, "another outcome"), requestID: reply.requestID)
            }
            try writer?.append(id)
            created(id, reply.requestID)
        }
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
