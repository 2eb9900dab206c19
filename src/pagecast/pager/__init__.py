"""userfaultfd pager: a file served page by page into a budget-limited region, and page packs streamed into it."""
