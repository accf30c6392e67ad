import ArgumentParser
import CampaignSend
import ChannelManagement

/// `campaign channels delete`: channels named on the command line or in a file.
struct ChannelsDelete: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete",
        abstract: "Delete channels: their ids as arguments, or --from a file (one per line, or a CSV with a channel_id column).",
        discussion: """
        Every id is checked before the first request. A channel already gone \
        (ChannelNotRegistered) is reported as such and the rest go on: the \
        command exits 0, so running it again after an interruption is harmless. \
        Deleting is final: APNs never issues the id again.
        """
    )

    @OptionGroup var options: ChannelOptions

    @Argument(help: "Channel ids, as create or list printed them.")
    var ids: [String] = []

    @Option(help: ArgumentHelp("Read the ids from this file.", valueName: "file"))
    var from: String?

    func validate() throws {
        if ids.isEmpty == (from == nil) { throw ValidationError("Name the channels as arguments or with --from FILE (one of the two).") }
    }

    func run() throws {
        // Every id is checked before anything is read or sent: a typo on line 900 must not stop a delete midway.
        let channels = try reportingErrors(as: "channels delete") {
            try from.map { path throws(ChannelError) in try ChannelIDList.read(path: path) } ?? channelIDs(ids)
        }
        try options.run("delete") { client in
            var (deleted, gone) = (0, 0)
            defer {
                printError("campaign channels delete: \(deleted) deleted, \(gone) already gone, \(channels.count - deleted - gone) left of \(channels.count)")
            }
            try ChannelRuns.delete(client: client, ids: channels) { id, result, requestID in
                switch result {
                case .deleted:
                    deleted += 1
                    printOutput(id.base64)
                    printError("campaign channels delete: deleted \(id)\(requestNote(requestID))")
                case .alreadyGone:
                    gone += 1
                    printError("campaign channels delete: \(id) was already gone (ChannelNotRegistered)\(requestNote(requestID))")
                }
            }
        }
    }
}
