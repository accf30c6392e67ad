print("campaign")
