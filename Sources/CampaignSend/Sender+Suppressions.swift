import CampaignIO
import FeedbackStore

/// The suppression store: what this send's answers add to it, merged while
/// it runs and again, from the whole journal, at its end.
extension Sender {
    /// Merges the suppressions answered since the last merge; a failure is
    /// logged (the journal holds them, and the run's end merges again).
    func mergeSuppressions() {
        guard let path = settings.feedbackStore else { return }
        storeMutex.lock()
        defer { storeMutex.unlock() }
        var cursor = mergedSuppressions
        let new = shared.suppressions(after: &cursor)
        guard !new.isEmpty else { return }
        do {
            try FeedbackStore.update(path: path) { store in for (token, ts) in new { store.record(token: token, timestamp: ts) } }
            mergedSuppressions = cursor
        } catch {
            logger("cannot update the suppression store yet: \(error)")
        }
    }

    /// Every suppression the journal holds, from every run (a run killed
    /// before its end left its 410s in the journal only), and this run's.
    func updateFeedbackStore() throws {
        guard let path = settings.feedbackStore else { return }
        var cursor = 0
        let all = (resumeState?.suppressions ?? []) + shared.suppressions(after: &cursor)
        guard !all.isEmpty else { return }
        // Under the store's lock: the parts of one plan may share it.
        try FeedbackStore.update(path: path) { store in
            for (token, ts) in all { store.record(token: token, timestamp: ts) }
        }
    }
}
