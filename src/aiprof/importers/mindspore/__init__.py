"""MindSpore's profiler outputs: the 1.x folder and its text files, the raw device files
(HWTS, step trace, AI CPU, framework), a raw job folder, and the cluster outputs."""
