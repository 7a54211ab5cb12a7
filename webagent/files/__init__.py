"""What webagent keeps on disk and hands to pages: ``disk.py`` (atomic writes, who may read what is
written, file names cut by bytes), ``downloads.py`` (``DownloadFolder``: where a run keeps its pages'
downloads) and ``uploads.py`` (``AllowedFiles``: the files a page may be given, read without
following a link).
"""
