import ArgumentParser
import APNSWire
import CampaignSend
import ChannelManagement

/// `campaign channels create`: new channels, their ids on standard output and appended to `--out`.
struct ChannelsCreate: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Create channels; print each new id (and append it to --out as it comes).",
        discussion: """
        One request at a time. Each id is appended to --out and fsynced before \
        the next request, so a run that is stopped (a signal: exit 75) or refused \
        midway (the 10,000-channel limit: exit 69) leaves every channel it made \
        in the file. A .csv --out gets a channel_id,storage header when new, which makes \
        it an audience for `campaign plan`.
        """
    )

    @OptionGroup var options: ChannelOptions

    @Option(help: ArgumentHelp("What APNs keeps for a device that is offline: none (expiration must be 0 on every broadcast; for frequent updates) or most-recent (the newest message, up to 8 hours).", valueName: "none|most-recent"))
    var storage: String = "none"

    @Option(help: ArgumentHelp("How many channels to create (1-10000).", valueName: "n"))
    var count: Int = 1

    @Option(help: ArgumentHelp("Append the new ids to this file (created 0644 when missing; a .csv file gets a channel_id,storage header).", valueName: "file"))
    var out: String?

    func validate() throws {
        if Broadcast.StoragePolicy(name: storage) == nil { throw ValidationError("--storage must be none or most-recent, not \"\(storage)\".") }
        if !(1...Broadcast.channelLimit).contains(count) { throw ValidationError("--count must be between 1 and \(Broadcast.channelLimit).") }
    }

    func run() throws {
        let policy = Broadcast.StoragePolicy(name: storage)!
        try options.run("create") { client in
            // Opened before the first request: a file that cannot be written must not cost a channel.
            let writer = try out.map { path throws(ChannelError) in try ChannelIDWriter(path: path, storage: policy) }
            var made = 0
            do {
                try ChannelRuns.create(client: client, storage: policy, count: count, writer: writer) { id, requestID, how in
                    made += 1
                    printOutput(id.base64)
                    switch how {
                    case .answered:
                        printError("campaign channels create: created \(id) (\(policy.name))\(requestNote(requestID))")
                    case .foundByList:
                        printError("campaign channels create: found \(id), new since the run began, after a create went unanswered\(requestNote(requestID))")
                    }
                }
            } catch {
                // Running the same command again would make --count more: say how many are left to make.
                let rest = count - made
                printError("campaign channels create: \(made) of \(count) channels created\(out.map { ", in \($0)" } ?? "")"
                           + (rest > 0 && made > 0 ? "; to make the other \(rest), run it again with --count \(rest)" : ""))
                throw error
            }
        }
    }
}
